import sys

from toolchain.cli import main

# guarded: worker processes started with "spawn" (the tuner's builders) import this module
if __name__ == "__main__":
    sys.exit(main())
