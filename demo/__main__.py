import sys

from lifeboat_dr.demo.training import main

sys.exit(main())
