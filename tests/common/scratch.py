"""One scratch directory per test process.

Every tempfile.mkdtemp (and TemporaryDirectory) the process makes after
use() lands inside it, and the whole directory goes when the process ends,
passed or failed: a test run leaves nothing in /tmp.  TL_KEEP_SCRATCH=1
keeps it, to look at a failure's reports.  Only this process's tempfile
module is pointed at it (tempfile.tempdir), never the environment's TMPDIR,
so the programs under test see the machine they would see without it.
A child forked from the test process (os.fork) runs the removal only in the
process that made the directory."""
import atexit
import os
import shutil
import tempfile

_root = None


def use(prefix="tl-test-"):
    """The process's scratch directory, made at the first call."""
    global _root
    if _root is None:
        _root = tempfile.mkdtemp(prefix=prefix)
        owner = os.getpid()

        def remove():
            if os.getpid() == owner and not os.environ.get("TL_KEEP_SCRATCH"):
                shutil.rmtree(_root, ignore_errors=True)

        atexit.register(remove)
        tempfile.tempdir = _root
    return _root
