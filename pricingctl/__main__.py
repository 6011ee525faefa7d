"""`python -m pricingctl`: the same as the installed `pricingctl` script."""

import sys

from pricingctl.main import main

sys.exit(main())
