import sys

from clustercheck.cli import main

sys.exit(main())
