#!/bin/bash
# Zero data retention on the gvisor backend (SPEC 10 and 19, on every backend): the whole of
# zdr_canary with the runs' sandboxes on gVisor. Skips where runsc cannot run.
. "$(dirname "$0")/gvisor_common.sh"
EPHEMERAL_TEST_SANDBOX=gvisor exec "$(dirname "$0")/zdr_canary.sh"
