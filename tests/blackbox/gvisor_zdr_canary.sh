#!/bin/bash
# Zero data retention on the gvisor backend (docs/API.md, docs/SECURITY.md, on every backend): the whole of
# zdr_canary with the runs' sandboxes on gVisor. Skips where runsc cannot run.
. "$(dirname "$0")/gvisor_common.sh"
EPHEMERAL_TEST_SANDBOX=gvisor exec "$(dirname "$0")/zdr_canary.sh"
