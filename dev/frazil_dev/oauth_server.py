"""A real OAuth 2.0 authorization server for tests: Keycloak (``keycloak-quarkus-dist`` from Maven
Central), with one realm holding one confidential client that may use the client-credentials
grant, on 127.0.0.1.

It issues RS256-signed JWT access tokens and publishes its keys (JWKS). The test broker's
OAUTHBEARER listener checks tokens against those keys (``kafka_broker``), and frazil asks its token
endpoint for them, as it would ask any identity provider in production.

The distribution is fetched once into the cache outside git, unpacked, and built once for the
embedded file database (``kc.sh build``); each start runs a copy in its own folder, so sessions
share nothing: the jars hard-linked (copied across filesystems), what Keycloak may write (its
configuration, its build, ``data/``) copied or made fresh. Keycloak 26 needs Java 21 or newer:
``java_home()`` finds one.

    with OAuthServer.start(workdir, token_lifetime_s=20) as idp:
        idp.token_url, idp.jwks_url, CLIENT_ID, CLIENT_SECRET
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import requests

from frazil.spark import maven
from frazil_dev.kafka_broker import free_port
from frazil_dev.server import ServerProcess

KEYCLOAK_VERSION = "26.7.3"
REALM = "frazil"
CLIENT_ID = "frazil-pipeline"
CLIENT_SECRET = "frazil-test-client-secret"   # tests only: a throwaway server on 127.0.0.1
AUDIENCE = "account"   # the ``aud`` of Keycloak's client-credentials tokens
START_TIMEOUT_S = 180.0


class OAuthServerError(RuntimeError):
    """The OAuth server could not be fetched, built or started."""


def java_home() -> Path:
    """A JDK of version 21 or newer: ``FRAZIL_JAVA21_HOME``, else the newest under /usr/lib/jvm."""
    given = os.environ.get("FRAZIL_JAVA21_HOME")
    candidates = [Path(given)] if given else sorted(Path("/usr/lib/jvm").glob("*"), reverse=True)
    for home in candidates:
        java = home / "bin" / "java"
        if not java.exists():
            continue
        out = subprocess.run([str(java), "-XshowSettings:properties", "-version"], capture_output=True, text=True)
        for line in out.stderr.splitlines():
            if line.strip().startswith("java.specification.version ="):
                if int(line.split("=")[1].strip().split(".")[0]) >= 21:
                    return home
    raise OAuthServerError("Keycloak needs Java 21 or newer; none found under /usr/lib/jvm (set FRAZIL_JAVA21_HOME)")


def distribution() -> Path:
    """Keycloak's home, fetched, unpacked and built for the file database on first use."""
    bundle = f"keycloak-{KEYCLOAK_VERSION}"
    root = maven.cache_dir() / bundle
    home = root / bundle
    built = root / ".built"
    if built.exists():
        return home
    try:
        lib = maven.fetch(bundle, [maven.Artifact("org.keycloak", "keycloak-quarkus-dist", KEYCLOAK_VERSION,
                                                  kind="zip")], transitive=False)
    except maven.FetchError as exc:
        raise OAuthServerError(str(exc)) from exc
    shutil.rmtree(home, ignore_errors=True)
    with zipfile.ZipFile(lib / f"keycloak-quarkus-dist-{KEYCLOAK_VERSION}.zip") as archive:
        archive.extractall(root)
    for script in (home / "bin").glob("*.sh"):
        script.chmod(0o755)
    print(f"building Keycloak {KEYCLOAK_VERSION} for the file database (once) ...", file=sys.stderr, flush=True)
    done = subprocess.run([str(home / "bin" / "kc.sh"), "build", "--db=dev-file"], capture_output=True, text=True,
                          env={**os.environ, "JAVA_HOME": str(java_home())})
    if done.returncode != 0:
        raise OAuthServerError(f"kc.sh build failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    built.write_text(KEYCLOAK_VERSION)
    return home


def _link_jar(source: str, target: str) -> None:
    """A jar of the distribution hard-linked (read only, 170 MB of them); anything else, or a jar on
    another filesystem than the cache, copied."""
    if source.endswith(".jar") and "/lib/quarkus/" not in source:
        try:
            os.link(source, target)
            return
        except OSError:
            pass
    shutil.copy2(source, target)


def realm(token_lifetime_s: int) -> dict[str, object]:
    """The realm imported at start: one confidential client with a service account (the
    client-credentials grant) and nothing else."""
    return {"realm": REALM, "enabled": True, "accessTokenLifespan": token_lifetime_s,
            "clients": [{"clientId": CLIENT_ID, "enabled": True, "protocol": "openid-connect",
                         "publicClient": False, "secret": CLIENT_SECRET, "serviceAccountsEnabled": True,
                         "standardFlowEnabled": False, "directAccessGrantsEnabled": False}]}


class OAuthServer(ServerProcess):
    LOG = "keycloak.log"
    WHAT = "the OAuth server (Keycloak)"
    Error = OAuthServerError

    @property
    def issuer(self) -> str:
        return f"http://127.0.0.1:{self.port}/realms/{REALM}"

    @property
    def token_url(self) -> str:
        return f"{self.issuer}/protocol/openid-connect/token"

    @property
    def jwks_url(self) -> str:
        return f"{self.issuer}/protocol/openid-connect/certs"

    def add_scope(self, name: str) -> None:
        """A client scope ``name`` that the client may ask for (an optional scope: granted when asked,
        listed in the token's ``scope``), made through Keycloak's admin API. Not in the imported
        realm: a realm that lists client scopes gets none of Keycloak's default ones."""
        admin = requests.post(f"http://127.0.0.1:{self.port}/realms/master/protocol/openid-connect/token",
                              data={"grant_type": "password", "client_id": "admin-cli", "username": "admin",
                                    "password": "admin"}, timeout=30)
        admin.raise_for_status()
        api = requests.Session()
        api.headers["Authorization"] = f"Bearer {admin.json()['access_token']}"
        base = f"http://127.0.0.1:{self.port}/admin/realms/{REALM}"
        made = api.post(f"{base}/client-scopes", json={"name": name, "protocol": "openid-connect", "attributes": {
            "include.in.token.scope": "true"}}, timeout=30)
        made.raise_for_status()
        scope_id = made.headers["Location"].rsplit("/", 1)[1]
        client = api.get(f"{base}/clients", params={"clientId": CLIENT_ID}, timeout=30).json()[0]["id"]
        api.put(f"{base}/clients/{client}/optional-client-scopes/{scope_id}", timeout=30).raise_for_status()

    @classmethod
    def start(cls, workdir: Path, *, token_lifetime_s: int = 300, heap: str = "512m") -> OAuthServer:
        """A server of its own under ``workdir`` whose tokens live ``token_lifetime_s``."""
        source = distribution()
        workdir = Path(workdir).resolve()
        home = workdir / "keycloak"
        shutil.rmtree(home, ignore_errors=True)
        shutil.copytree(source, home, copy_function=_link_jar, ignore=lambda folder, names: (
            ["data"] if Path(folder) == source else []))
        (home / "data" / "import").mkdir(parents=True)
        (home / "data" / "import" / f"{REALM}-realm.json").write_text(json.dumps(realm(token_lifetime_s)))
        port = free_port()
        env = {**os.environ, "JAVA_HOME": str(java_home()), "KC_BOOTSTRAP_ADMIN_USERNAME": "admin",
               "KC_BOOTSTRAP_ADMIN_PASSWORD": "admin", "JAVA_OPTS_KC_HEAP": f"-Xms64m -Xmx{heap}"}
        server = cls.spawn([str(home / "bin" / "kc.sh"), "start", "--optimized", "--http-enabled=true",
                            "--http-host=127.0.0.1", f"--http-port={port}", "--hostname-strict=false",
                            "--import-realm", "--http-management-port", str(free_port())], workdir, port, env=env)
        return server.ready(f"{server.issuer}/.well-known/openid-configuration", START_TIMEOUT_S, every_s=0.5)


if __name__ == "__main__":   # fetch and build ahead of the tests
    try:
        print(distribution())
    except OAuthServerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)
