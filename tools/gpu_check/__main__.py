"""`python -m tools.gpu_check`: see check.py."""

import sys

from tools.gpu_check.check import main

sys.exit(main())
