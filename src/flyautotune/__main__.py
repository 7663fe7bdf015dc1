"""``python -m flyautotune``: the same command as the ``flyautotune`` script."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
