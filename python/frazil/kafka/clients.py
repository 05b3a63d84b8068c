"""Connection settings shared by every Kafka client frazil creates (consumer, producers, admin):
the bootstrap servers, TLS and SASL. Each client is built with ``AIOKafka...(**options(kafka), ...)``
so no client can be created without the pipeline's security settings."""

from __future__ import annotations

import asyncio
import logging
import re
import ssl
from collections.abc import Iterable
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Protocol

from aiokafka.errors import KafkaConnectionError, SaslAuthenticationFailed

from frazil.config import KafkaConfig, KafkaSecurity
from frazil.errors import ConfigError, KafkaUnavailable

if TYPE_CHECKING:
    from frazil.kafka.oauth import ClientCredentials

log = logging.getLogger(__name__)


class Startable(Protocol):
    async def start(self) -> Any: ...


def options(kafka: KafkaConfig | str) -> dict[str, Any]:
    """Keyword arguments for any aiokafka client. A bare bootstrap string (tests, the local
    broker) means PLAINTEXT with no authentication."""
    if isinstance(kafka, str):
        return {"bootstrap_servers": kafka}
    return {"bootstrap_servers": kafka.bootstrap_servers, **security_options(kafka.security)}


def security_options(sec: KafkaSecurity) -> dict[str, Any]:
    out: dict[str, Any] = {"security_protocol": sec.protocol}
    if sec.tls:
        out["ssl_context"] = _ssl_context(sec)
    if sec.oauth:
        out.update(sasl_mechanism="OAUTHBEARER", sasl_oauth_token_provider=token_provider(sec))
    elif sec.sasl:
        out.update(sasl_mechanism=sec.sasl_mechanism, sasl_plain_username=sec.sasl_username,
                   sasl_plain_password=sec.sasl_password)
    return out


@lru_cache(maxsize=8)
def token_provider(sec: KafkaSecurity) -> ClientCredentials:
    """One OAUTHBEARER token source per security settings: every client of the process shares its
    token, and one refresh serves them all."""
    from frazil.kafka.oauth import ClientCredentials  # with requests: only for pipelines that use it

    return ClientCredentials(sec.sasl_oauthbearer_token_endpoint_url, sec.sasl_oauthbearer_client_id,
                             sec.sasl_oauthbearer_client_secret, sec.sasl_oauthbearer_scope)


@lru_cache(maxsize=8)
def _ssl_context(sec: KafkaSecurity) -> ssl.SSLContext:
    """One TLS context per security settings: certificate files are read once per process."""
    try:
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=sec.ssl_cafile or None)
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(f"kafka.ssl_cafile {sec.ssl_cafile}: not a PEM certificate file frazil can read "
                          f"({exc})") from None
    context.check_hostname = sec.ssl_check_hostname
    if sec.ssl_certfile:
        try:
            context.load_cert_chain(sec.ssl_certfile, sec.ssl_keyfile, password=sec.ssl_key_password or None)
        except (ssl.SSLError, OSError) as exc:
            keyfile = sec.ssl_keyfile or "(in the certificate file)"
            raise ConfigError(f"kafka.ssl_certfile {sec.ssl_certfile} / ssl_keyfile {keyfile}: the client certificate "
                              f"and key do not load ({exc}); check the files and ssl_key_password") from None
    return context


class _Reasons(logging.Handler):
    """Keeps what aiokafka logs about failed connections: its exception says only "Unable to
    bootstrap", the log line says why (refused, TLS, SASL)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.seen: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "Unable connect" in message or "Authentication failed" in message:
            self.seen.append(message.splitlines()[0])


async def connect(client: Startable, kafka: KafkaConfig | str) -> None:
    """``client.start()``; a broker that cannot be reached or refuses us is one clear error
    (``KafkaUnavailable``, exit status 3) naming the servers, the security settings and why."""
    reasons = _Reasons()
    logger = logging.getLogger("aiokafka")
    logger.addHandler(reasons)
    try:
        await client.start()
    except (KafkaConnectionError, SaslAuthenticationFailed) as exc:
        await close_quietly(client)   # a half-started client holds sockets and tasks
        raise unavailable(kafka, reasons.seen[-1] if reasons.seen else str(exc)) from None
    finally:
        logger.removeHandler(reasons)


async def stop_client(client: Any) -> None:
    """``client.stop()``. aiokafka's consumer can raise the ``CancelledError`` of a fetch task it
    cancelled itself while the broker is away; raised out of a ``finally``, it would hide the error
    that stopped frazil and end the process with a traceback. Swallowed here unless this task
    itself is being cancelled."""
    try:
        await client.stop()
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise
        log.debug("stopping %s: its own cancelled task's CancelledError, ignored", type(client).__name__)
    finally:
        _retrieve_transaction_error(client)


def _retrieve_transaction_error(client: Any) -> None:
    """A producer whose sender failed (a transactional one fenced by a newer producer with its
    transactional id: a zombie's fate) leaves the error in futures nothing awaits (aiokafka 0.14,
    pinned: ``TransactionManager.fatal_error`` makes a fresh transaction future for it, and each
    failed batch sets it on its drain waiter): collected later, they print asyncio's "Future
    exception was never retrieved" traceback. The error was already raised to the caller that met
    it; it is read here, once the client is stopped, so it is not reported a second time."""
    manager = getattr(client, "_txn_manager", None)
    waiters = [manager.wait_for_transaction_end()] if manager is not None else []
    accumulator = getattr(client, "_message_accumulator", None)
    if accumulator is not None:
        batches = [*(b for queue in accumulator._batches.values() for b in queue), *accumulator._pending_batches]
        waiters += [getattr(batch, "_drain_waiter", None) for batch in batches]
    for waiter in waiters:
        if isinstance(waiter, asyncio.Future) and waiter.done() and not waiter.cancelled():
            waiter.exception()


async def close_quietly(*clients: Any) -> None:
    """Stop or close each client, whatever state a failed start left it in (cleanup on an error
    path: the error being raised is the one that matters)."""
    for client in clients:
        stop = getattr(client, "stop", None) or client.close
        try:
            await stop()
        except Exception as exc:  # noqa: BLE001 - see above
            log.debug("closing %s after a failed start: %s", type(client).__name__, exc)


def unavailable(kafka: KafkaConfig | str, why: str) -> KafkaUnavailable:
    servers = kafka if isinstance(kafka, str) else kafka.bootstrap_servers
    how = "PLAINTEXT" if isinstance(kafka, str) else kafka.security.describe()
    # TLS 1.3: a broker that refuses the client's certificate (or its absence) closes the connection
    # after the handshake, and that is all the client sees
    hint = (" (a TLS connection the broker closed: if its listener requires a client certificate, "
            "kafka.ssl_certfile and ssl_keyfile must name one its truststore's CA signed)"
            if not isinstance(kafka, str) and kafka.security.tls
            and re.search(r"closed|certificate|unknown ca", why, re.IGNORECASE) else "")
    return KafkaUnavailable(f"cannot reach Kafka at {servers} ({how}): {why}{hint}. Check kafka.bootstrap_servers, "
                            "that the brokers are up, and kafka.security_protocol with its sasl_*/ssl_* settings")


def _retrieved(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


async def delivered(futures: Iterable[asyncio.Future[Any]]) -> None:
    """Wait until every send of a transaction is acknowledged; raise the first failure. aiokafka
    commits a transaction even if one of its batches failed (too large, no leader), so a caller
    must see each send land before the commit. The other futures' errors are retrieved (the
    transaction's failure is the one raised), so a fenced producer leaves no "Future exception was
    never retrieved" behind at shutdown."""
    futures = list(futures)
    for future in futures:
        future.add_done_callback(_retrieved)
    await asyncio.gather(*futures)
