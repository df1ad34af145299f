"""python3 -m sliced_agent: see sliced_agent.main."""
import sys

from sliced_agent.main import main

sys.exit(main())
