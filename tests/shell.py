"""`colls` as a shell runs it, without paying Python's start and colls' imports for every command.

One helper process per test worker imports ``colls.cli`` once and then forks a child per command: the child
takes the command's working directory and environment (the caller's at the call), a stdin of /dev/null and stdout and stderr of its own (files), runs the
real entry point ``colls.cli.main`` and exits with the status a shell would see, as ``python -m`` would (a
``SystemExit`` of text prints it and exits 1; anything else uncaught prints its traceback and exits 1). The
helper is single-threaded, so forking it is safe; a command that runs longer than its timeout is killed and
reported as exit status -9. Each child starts from the helper's state, which no command changes (they run in
children), so commands do not see each other.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

_HELPER = r'''
import json, os, sys, time, traceback
import colls.cli

def child(args, cwd, env, out, err):
    code = 1
    try:
        os.environ.clear()
        os.environ.update(env)
        os.chdir(cwd)
        for fd, path, flags in ((0, os.devnull, os.O_RDONLY), (1, out, os.O_WRONLY), (2, err, os.O_WRONLY)):
            f = os.open(path, flags)
            os.dup2(f, fd)
            os.close(f)
        sys.stdin = open(0, closefd=False)
        sys.stdout = open(1, "w", closefd=False)
        sys.stderr = open(2, "w", closefd=False, errors="backslashreplace", buffering=1)
        sys.argv = ["colls"] + args
        try:
            colls.cli.main()
            code = 0
        except SystemExit as e:
            if e.code is None:
                code = 0
            elif isinstance(e.code, int):
                code = e.code
            else:
                print(e.code, file=sys.stderr)
        except BaseException:
            traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code & 0xFF)

for line in sys.stdin:
    req = json.loads(line)
    pid = os.fork()
    if pid == 0:
        child(req["args"], req["cwd"], req["env"], req["out"], req["err"])
    deadline = time.monotonic() + req["timeout"]
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            rc = os.waitstatus_to_exitcode(status)
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            rc = -9
            break
        time.sleep(0.002)
    print(rc, flush=True)
'''

_helper: subprocess.Popen | None = None


def _start() -> subprocess.Popen:
    global _helper
    if _helper is None or _helper.poll() is not None:
        _helper = subprocess.Popen([sys.executable, "-c", _HELPER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   text=True, bufsize=1)
    return _helper


def run(args, cwd=None, timeout: float = 60) -> tuple[int, str, str]:
    """``colls ARGS`` in ``cwd`` (default: this process's): (exit status, stdout, stderr)."""
    helper = _start()
    with tempfile.TemporaryDirectory() as tmp:
        out, err = os.path.join(tmp, "out"), os.path.join(tmp, "err")
        for path in (out, err):
            open(path, "w").close()
        helper.stdin.write(json.dumps({"args": [str(a) for a in args], "cwd": str(cwd or os.getcwd()),
                                       "env": dict(os.environ), "out": out, "err": err, "timeout": timeout}) + "\n")
        helper.stdin.flush()
        rc = int(helper.stdout.readline())
        with open(out, errors="replace") as f_out, open(err, errors="replace") as f_err:
            return rc, f_out.read(), f_err.read()
