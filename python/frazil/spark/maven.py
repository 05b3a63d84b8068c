"""Jar bundles from Maven Central, fetched once by Maven into a cache outside git.

A bundle is a named list of artifacts. ``fetch`` writes a one-module pom for it and lets
``mvn dependency:copy-dependencies`` copy the jars into ``<cache>/<bundle>/lib``; a marker file
makes the next call free. Maven runs with its own settings file that sends every repository
to Maven Central: some poms (Spark's) name mirrors that this machine cannot reach.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path


class FetchError(RuntimeError):
    """Maven could not fetch a bundle."""


@dataclass(frozen=True)
class Artifact:
    group: str
    name: str
    version: str
    # (group, name) pairs left out of this artifact's dependencies
    exclude: tuple[tuple[str, str], ...] = field(default=())
    # a secondary jar of the artifact, e.g. "tests" or "test-fixtures"
    classifier: str = ""
    # the file's type when it is not a jar, e.g. "zip" (a server's distribution)
    kind: str = ""

    def coordinates(self) -> str:
        """``group:name:version:type[:classifier]``, as ``dependency:copy`` takes it."""
        return ":".join([self.group, self.name, self.version, self.kind or "jar",
                         *([self.classifier] if self.classifier else [])])

    def xml(self) -> str:
        exclusions = "".join(f"<exclusion><groupId>{g}</groupId><artifactId>{a}</artifactId></exclusion>"
                             for g, a in self.exclude)
        return (f"    <dependency><groupId>{self.group}</groupId><artifactId>{self.name}</artifactId>"
                f"<version>{self.version}</version>"
                + (f"<classifier>{self.classifier}</classifier>" if self.classifier else "")
                + (f"<type>{self.kind}</type>" if self.kind else "")
                + (f"<exclusions>{exclusions}</exclusions>" if exclusions else "") + "</dependency>\n")


_POM = """<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dev.frazil</groupId>
  <artifactId>{bundle}</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
{dependencies}  </dependencies>
</project>
"""

_SETTINGS = """<settings><mirrors><mirror><id>maven-central</id><mirrorOf>*</mirrorOf>
<url>https://repo.maven.apache.org/maven2</url></mirror></mirrors></settings>
"""


def cache_dir() -> Path:
    return Path(os.environ.get("FRAZIL_CACHE", Path.home() / ".cache" / "frazil"))


def fetch(bundle: str, artifacts: list[Artifact], *, transitive: bool = True) -> Path:
    """The bundle's lib directory, fetched first when the cache does not hold it.

    With ``transitive=False`` only the listed artifacts are copied (for jars that go on a
    classpath that already has their dependencies, such as Spark's)."""
    root = cache_dir() / bundle
    lib = root / "lib"
    marker = root / ".complete"
    if marker.exists():
        return lib
    if shutil.which("mvn") is None:
        raise FetchError(f"Maven (mvn) is needed to fetch {bundle}; install it (apt-get install maven)")
    root.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(lib, ignore_errors=True)
    (root / "pom.xml").write_text(_POM.format(bundle=bundle, dependencies="".join(a.xml() for a in artifacts)))
    (root / "settings.xml").write_text(_SETTINGS)
    print(f"fetching {bundle} from Maven Central into {lib} ...", file=sys.stderr, flush=True)
    if transitive:
        commands = [["dependency:copy-dependencies", f"-DoutputDirectory={lib}", "-DincludeScope=runtime"]]
    else:   # each file alone: copy-dependencies would still resolve (and need) every pom beneath them
        commands = [["dependency:copy", f"-Dartifact={a.coordinates()}", f"-DoutputDirectory={lib}"]
                    for a in artifacts]
    for goal in commands:
        cmd = ["mvn", "-B", "-q", "-s", str(root / "settings.xml"), "-f", str(root / "pom.xml"), *goal]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise FetchError(f"mvn failed ({proc.returncode}) fetching {bundle}:\n"
                             f"{proc.stdout[-4000:]}{proc.stderr[-4000:]}")
    marker.write_text(bundle)
    return lib
