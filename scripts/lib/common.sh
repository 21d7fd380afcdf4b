# shellcheck shell=bash
# Helpers shared by the scripts under scripts/ (sourced, not run).

# A TCP port on 127.0.0.1 that was free a moment ago.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
