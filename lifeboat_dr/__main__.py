import sys

from lifeboat_dr.shell.cli import main

sys.exit(main())
