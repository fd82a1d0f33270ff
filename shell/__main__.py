import sys

from shell.cli import main

sys.exit(main())
