"""Importing this module behaves as the program's own signal handler would
if it ran while the library starts the bridge (Python runs handlers at any
bytecode boundary of the main thread, the bridge's start included):
TL_BOOT_RAISE=interrupt raises KeyboardInterrupt (Ctrl-C), exit raises
SystemExit(7) (a SIGTERM handler calling sys.exit(7)), error raises an
ordinary exception (the bridge's own failure)."""
import os

what = os.environ.get("TL_BOOT_RAISE")
if what == "interrupt":
    raise KeyboardInterrupt
if what == "exit":
    raise SystemExit(7)
raise RuntimeError("stand-in bridge failed")


def activate():
    pass
