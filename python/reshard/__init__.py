"""reshard: move model weights between parallel layouts."""
from reshard._reshard import *  # noqa: F401,F403
