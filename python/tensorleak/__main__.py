"""`python -m tensorleak ...` and the `tensorleak` console command: the CLI
binary installed in this package (run, report, check, diff, merge), exec'd in
place so that its exit status and the preloaded program's reach the caller
unchanged.  The binary finds the library and the simulated CUDA stack next to
itself (tensorleak/lib/)."""

import os
import sys

from tensorleak import cli_path


def main():
    cli = cli_path()
    if cli is None:
        sys.stderr.write("tensorleak: the CLI is not installed in %s (this package was not installed by pip; "
                         "build it with meson: README.md)\n" % os.path.dirname(os.path.abspath(__file__)))
        return 127
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execv(cli, ["tensorleak"] + sys.argv[1:])
    except OSError as err:
        sys.stderr.write("tensorleak: %s: %s\n" % (cli, err.strerror))
        return 126


if __name__ == "__main__":
    sys.exit(main())
