import sys

from rlkeep.cli import main

sys.exit(main())
