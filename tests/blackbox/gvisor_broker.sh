#!/bin/bash
# The broker on the gvisor backend (docs/BROKER.md: the same path out on every backend): the whole of
# broker_connection (credential never inside, redaction, denials, HTTPS) with the runs' sandboxes
# on gVisor. Skips where runsc cannot run.
. "$(dirname "$0")/gvisor_common.sh"
EPHEMERAL_TEST_SANDBOX=gvisor exec "$(dirname "$0")/broker_connection.sh"
