#!/bin/bash
# Zero data retention on the microvm backend (docs/API.md, docs/SECURITY.md, on every backend): the whole of
# zdr_canary with the runs' sandboxes in microVMs (under software emulation where KVM does not
# boot guests, as every microvm test). Skips where the microvm backend cannot run.
. "$(dirname "$0")/microvm_common.sh"
EPHEMERAL_TEST_SANDBOX=microvm exec "$(dirname "$0")/zdr_canary.sh"
