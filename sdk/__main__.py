import sys

from sdk.runtime.cli import main

sys.exit(main())
