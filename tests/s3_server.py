"""A real S3-compatible server for the tests: Ceph's RADOS Gateway (Debian's ``radosgw``) on a one-node
Ceph cluster made in a temporary directory (a monitor and one object store daemon keeping its objects in
memory), started as root where ``ceph-mon``, ``ceph-osd`` and ``radosgw`` are installed (`.ci/run` installs
them), and the reason it cannot be otherwise. Nothing here is a stand-in: the workspace store speaks S3
(boto3) to the gateway, which keeps the objects in RADOS."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from mother.server import free_port

__all__ = ["CephS3", "prestart", "shared", "stop_shared", "unavailable"]

BINARIES = ("ceph-mon", "ceph-osd", "radosgw", "radosgw-admin", "monmaptool", "ceph")
ACCESS_KEY, SECRET_KEY = "MHTESTACCESSKEY00001", "mh-test-secret-key-000000000000000000000"


def unavailable() -> str | None:
    """Why the gateway cannot run here, or None."""
    missing = [b for b in BINARIES if shutil.which(b) is None]
    if missing:
        return f"no {', '.join(missing)} here (Debian's ceph-mon, ceph-osd and radosgw; .ci/run installs them as root)"
    if os.geteuid() != 0:
        return "the Ceph daemons are started as root here"
    return None


class CephS3:
    """A monitor, one memory-backed object store daemon and the gateway, in a directory of their own;
    ``endpoint``, ``access_key`` and ``secret_key`` once started. Stop kills all three and removes it."""

    def __init__(self) -> None:
        self.access_key, self.secret_key = ACCESS_KEY, SECRET_KEY
        self._fresh()

    def _fresh(self) -> None:
        # short: the daemons' admin sockets live under it (a UNIX socket path is at most 107 bytes)
        self.dir = Path(tempfile.mkdtemp(prefix="mh-ceph-"))
        self.mon_port, self.rgw_port = free_port(), free_port()
        self.endpoint = f"http://127.0.0.1:{self.rgw_port}"
        self.conf = self.dir / "ceph.conf"
        self.procs: list[subprocess.Popen[bytes]] = []

    def _env(self) -> dict[str, str]:
        return {**os.environ, "CEPH_CONF": str(self.conf)}

    def _run(self, *args: str, timeout: float = 60) -> str:
        done = subprocess.run(
            args, env=self._env(), capture_output=True, text=True, timeout=timeout, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(args[:3])}: {done.stderr.strip()[-500:]}")
        return done.stdout

    def _daemon(self, *args: str) -> None:
        log = (self.dir / "log" / f"{Path(args[0]).name}-{len(self.procs)}.out").open("ab")
        self.procs.append(
            subprocess.Popen(
                [*args, "-f"],
                env=self._env(),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )

    def start(self, timeout: float = 60, tries: int = 4) -> CephS3:
        """The cluster and its gateway, answering; made again from nothing (new directory, ports and
        fsid) when a try does not come up (its object store daemon not up in 10 s, its gateway not
        answering in ``timeout``), at most ``tries`` times."""
        for attempt in range(1, tries + 1):
            try:
                return self._start_once(timeout)
            except RuntimeError:
                self.stop()
                if attempt == tries:
                    raise
                self._fresh()
        raise AssertionError("unreachable")

    def _start_once(self, timeout: float) -> CephS3:
        d = self.dir
        for sub in ("mon", "osd", "run", "log", "rgw"):
            (d / sub).mkdir()
        fsid = str(uuid.uuid4())
        # msgr v1 and no cephx: one host, loopback only, nothing to authenticate to each other
        self.conf.write_text(
            "\n".join(
                [
                    "[global]",
                    f"fsid = {fsid}",
                    f"mon host = v1:127.0.0.1:{self.mon_port}",
                    "auth cluster required = none",
                    "auth service required = none",
                    "auth client required = none",
                    "auth supported = none",
                    "ms bind msgr2 = false",
                    "ms mon client mode = crc",
                    "ms client mode = crc",
                    "ms cluster mode = crc",
                    "ms service mode = crc",
                    "osd pool default size = 1",
                    "osd pool default min size = 1",
                    "osd pool default pg num = 8",
                    "osd pool default pgp num = 8",
                    "osd pool default pg autoscale mode = off",
                    "mon allow pool size one = true",
                    "mon max pg per osd = 1000",
                    "mon data avail warn = 1",
                    "mon data avail crit = 0",
                    "mon warn on pool no redundancy = false",
                    "osd crush chooseleaf type = 0",
                    # placed in the map below; at its start the daemon asks nothing of the monitor
                    # (which now and then refused it: 'wrong fsid', and it never came up)
                    "osd crush update on start = false",
                    "osd class update on start = false",
                    f"run dir = {d / 'run'}",
                    f"log file = {d / 'log'}/$name.log",
                    f"admin socket = {d / 'run'}/$name.asok",
                    f"pid file = {d / 'run'}/$name.pid",
                    f"mon data = {d / 'mon'}",
                    f"osd data = {d / 'osd'}",
                    "osd objectstore = memstore",
                    "memstore device bytes = 1073741824",
                    f"rgw frontends = beast endpoint=127.0.0.1:{self.rgw_port}",
                    f"rgw data = {d / 'rgw'}",
                    "",
                ]
            )
        )
        self._run(
            "monmaptool",
            "--create",
            "--addv",
            "a",
            f"[v1:127.0.0.1:{self.mon_port}]",
            "--fsid",
            fsid,
            str(d / "monmap"),
        )
        self._run("ceph-mon", "--mkfs", "-i", "a", "--monmap", str(d / "monmap"))
        self._daemon("ceph-mon", "-i", "a")
        # the daemon's uuid given to both, or it asks the monitor for an id under another ('wrong fsid')
        osd_uuid = str(uuid.uuid4())
        osd = self._run("ceph", "osd", "create", osd_uuid, timeout=30).strip()
        self._run("ceph-osd", "-i", osd, "--mkfs", "--osd-uuid", osd_uuid)
        self._daemon("ceph-osd", "-i", osd)
        self._run(
            "ceph", "osd", "crush", "add", f"osd.{osd}", "1.0", "host=localhost", "root=default"
        )
        self._osd_up(osd)
        self._daemon("radosgw", "-n", "client.rgw")
        deadline = time.monotonic() + timeout
        while True:
            try:
                if httpx.get(self.endpoint, timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                logs = "\n".join(
                    f"{p.name}: {p.read_text(errors='replace')[-1500:]}"
                    for p in sorted((self.dir / "log").glob("*"))
                    if p.name.startswith(("client.rgw", "radosgw", "osd", "mon"))
                )
                self.stop()
                raise RuntimeError(
                    f"the gateway did not answer on {self.endpoint} in {timeout:.0f} s\n{logs}"
                )
            time.sleep(0.2)
        self._run(
            "radosgw-admin",
            "user",
            "create",
            "--uid",
            "mother",
            "--display-name",
            "mother",
            "--access-key",
            self.access_key,
            "--secret",
            self.secret_key,
        )
        return self

    def client(self, **options: Any) -> Any:
        """A boto3 S3 client of the gateway, as the mother user (``options``: more of boto3.client's)."""
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name="us-east-1",
            **options,
        )

    def _osd_up(self, osd: str, timeout: float = 10) -> None:
        """The object store daemon is up (the monitor says so), or RuntimeError with its log's end."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            stat = self._run("ceph", "osd", "stat", "-f", "json", timeout=20)
            if '"num_up_osds":1' in stat.replace(" ", ""):
                return
            time.sleep(0.3)
        log = self.dir / "log" / f"osd.{osd}.log"
        tail = log.read_text(errors="replace")[-800:] if log.exists() else ""
        raise RuntimeError(f"osd.{osd} did not come up in {timeout:.0f} s: {tail}")

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> CephS3:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()


# the session's gateway: started in the background when the session starts (it takes ~12 s, mostly
# waiting on the cluster to make the gateway's pools), so the tests that need it do not wait for it
_session: Future[CephS3] | None = None


def prestart() -> None:
    """Start the session's gateway in the background, where it can run (else nothing)."""
    global _session
    if _session is None and unavailable() is None:
        _session = ThreadPoolExecutor(1, thread_name_prefix="ceph").submit(CephS3().start)


def shared(timeout: float = 180) -> CephS3:
    """The session's gateway, once it answers (started now if :func:`prestart` was not called)."""
    prestart()
    if _session is None:
        raise RuntimeError(unavailable() or "the gateway cannot run here")
    return _session.result(timeout=timeout)


def stop_shared() -> None:
    """Stop the session's gateway (at the session's end), whether or not it came up."""
    if _session is not None and _session.done() and _session.exception() is None:
        _session.result().stop()
