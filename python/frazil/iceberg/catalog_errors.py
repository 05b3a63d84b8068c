"""What a catalog's failures mean, and how a catalog is named in messages (secrets masked): set-up
to fix (exit status 2: a wrong property, refused credentials, a call the server does not serve, no
AWS region) or an outage to wait out (``outage``; exit status 4 once it lasts)."""

from __future__ import annotations

import re
import sys

from pyiceberg.exceptions import (
    CommitStateUnknownException,
    OAuthError,
    ServerError,
    ServiceUnavailableError,
    TooManyRequestsError,
)

from frazil.config import CatalogConfig
from frazil.errors import CatalogUnavailable, ConfigError, FrazilError, first_line

_SECRET_KEYS = re.compile(r"password|secret|token|credential|key", re.IGNORECASE)


def masked_uri(uri: str) -> str:
    """``uri`` as it may be printed: the password of ``user:password@`` (whatever characters it
    holds, as SQLAlchemy parses it) and any secret-named query parameter shown as ``***``."""
    at = uri.rfind("@", 0, uri.find("?") if "?" in uri else len(uri))
    scheme = uri.find("://")
    if scheme >= 0 and at > scheme:
        user = uri[scheme + 3:at].split(":", 1)[0]
        uri = f"{uri[:scheme + 3]}{user}:***{uri[at:]}" if ":" in uri[scheme + 3:at] else uri
    return re.sub(r"([?&][^=&]*(?:password|secret|token|credential|key)[^=&]*=)[^&]*", r"\1***", uri,
                  flags=re.IGNORECASE)


def describe(cfg: CatalogConfig) -> str:
    """The catalog's type and address for messages, with any password in the URI masked."""
    return " ".join(filter(None, (cfg.properties.get("type", "sql"), masked_uri(cfg.properties.get("uri", "")))))


def refused_message(cfg: CatalogConfig, exc: Exception) -> str:
    """A REST catalog (or its token endpoint) that refused frazil's credentials: what answered, what
    it said, and which properties to check. Never the secret."""
    props = cfg.properties
    if isinstance(exc, OAuthError):
        endpoint = props.get("oauth2-server-uri") or f"{props.get('uri', '').rstrip('/')}/v1/oauth/tokens"
        return (f"catalog {cfg.name} ({describe(cfg)}): the token endpoint {endpoint} refused frazil's client "
                f"credentials: {first_line(exc)}; check catalog.properties credential (\"client-id:client-secret\"), "
                "scope and oauth2-server-uri")
    if props.get("rest.sigv4-enabled", "").lower() == "true":
        return (f"catalog {cfg.name} ({describe(cfg)}) refused frazil's SigV4-signed request: {type(exc).__name__}: "
                f"{first_line(exc)}; check the AWS credentials (the default chain: AWS_ACCESS_KEY_ID, a profile, "
                "the instance role), catalog.properties rest.signing-region and rest.signing-name, and the "
                "principal's grants")
    return (f"catalog {cfg.name} ({describe(cfg)}) refused frazil's request: {type(exc).__name__}: "
            f"{first_line(exc)}; check catalog.properties credential or token, scope and the principal's grants")


def wrong_properties() -> tuple[type[Exception], ...]:
    """What ``load_catalog`` raises for a wrong uri, type or key. SQLAlchemy's ``ArgumentError`` (a
    malformed uri) only when a SQL catalog loaded SQLAlchemy: other catalogs start without it."""
    sql = sys.modules.get("sqlalchemy.exc")
    return (ImportError, ValueError, TypeError, KeyError, *((sql.ArgumentError,) if sql is not None else ()))


# answers that say the call failed for now: the server is down, overloaded or lost the outcome
_OUTAGE_ANSWERS = (ServerError, ServiceUnavailableError, TooManyRequestsError, CommitStateUnknownException)
# an OSError that names a path, not a connection: a missing or unreadable file stays so
_FILE_ERRORS = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError, FileExistsError)


def outage(exc: BaseException) -> bool:
    """Whether a catalog call's failure may be the catalog or its storage down for now, worth
    waiting out: a refused, cut or timed-out connection (Python's, requests', botocore's,
    Thrift's), a database error of the connection or a lock (SQLAlchemy's and sqlite3's
    ``OperationalError``, SQLAlchemy's ``InterfaceError``), a 5xx or 429 answer, an unknown commit
    outcome, frazil's own ``CatalogUnavailable``. Not an answer that refuses the call (no such
    table, 400, 401, 403, a validation), a missing file, or an error of the call itself."""
    if isinstance(exc, (CatalogUnavailable, *_OUTAGE_ANSWERS)):
        return True
    if isinstance(exc, OSError):
        return not isinstance(exc, _FILE_ERRORS)
    transient: list[type[BaseException]] = []
    for module, names in (("sqlalchemy.exc", ("OperationalError", "InterfaceError")),
                          ("sqlite3", ("OperationalError",)),
                          ("botocore.exceptions", ("EndpointConnectionError", "ConnectionClosedError",
                                                   "ReadTimeoutError", "ConnectTimeoutError")),
                          ("thrift.transport.TTransport", ("TTransportException",))):
        loaded = sys.modules.get(module)
        transient.extend(getattr(loaded, n) for n in names if loaded is not None and hasattr(loaded, n))
    return isinstance(exc, tuple(transient))


def unserved_call(cfg: CatalogConfig, exc: Exception) -> ConfigError | None:
    """A catalog server that answers but does not serve a call pyiceberg makes: set-up to fix (exit
    2), not an outage. A Hive 4 metastore no longer serves ``get_table``."""
    thrift = sys.modules.get("thrift.Thrift")
    if (thrift is None or not isinstance(exc, thrift.TApplicationException)
            or exc.type != thrift.TApplicationException.UNKNOWN_METHOD):
        return None
    return ConfigError(f"catalog {cfg.name} ({describe(cfg)}) answered but does not serve a call pyiceberg makes: "
                       f"{first_line(exc)}; pyiceberg speaks to Hive Metastores of version 3.1 or older (Hive 4's "
                       "metastore no longer serves get_table): point catalog.properties uri at one")


def aws_setup_missing() -> tuple[type[Exception], ...]:
    """What boto3 raises for a region (when the catalog is loaded) or credentials (at its first
    call) it cannot find. Only when an AWS catalog loaded botocore."""
    aws = sys.modules.get("botocore.exceptions")
    return (aws.NoRegionError, aws.NoCredentialsError) if aws is not None else ()


def aws_setup_error(cfg: CatalogConfig, exc: Exception) -> FrazilError:
    """No region is set-up to fix (exit 2). No credentials may be the instance role's endpoint
    failing to answer for a moment: an outage (exit 4, restarted by the unit), with the same hint."""
    message = (f"catalog {cfg.name} ({describe(cfg)}) cannot be used: {first_line(exc).rstrip('.')}; set "
               "catalog.properties \"client.region\" (or AWS_REGION in the environment) and the credentials "
               "(the AWS_* environment variables, a profile, or an instance role)")
    return ConfigError(message) if isinstance(exc, aws_setup_missing()[:1]) else CatalogUnavailable(message)
