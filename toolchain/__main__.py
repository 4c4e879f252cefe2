import sys

from toolchain.cli import main

sys.exit(main())
