"""``python -m worker``: run one model worker (started by the gateway).

The process ends with ``os._exit`` once the worker has shut down, so no
native destructor races the daemon threads still parked in MLX or ZeroMQ.
"""

import logging
import os
import sys

from worker.main import main

code = main()
logging.shutdown()
sys.stdout.flush()
sys.stderr.flush()
os._exit(code)
