# The webhook tests' receiver (tests/blackbox/webhook_receiver.py), sourced after lib.sh. Not
# executable: tests/run.sh runs only executable scripts.
#
#   start_receiver [CERT KEY]   on a free loopback port (HTTPS with CERT and KEY): sets RECV_PORT,
#                               RECV_LOG (its JSON lines) and RECV_UP (the file that turns /down's
#                               500 into 200); stopped with the test. Another call starts another.

start_receiver() {
    RECV_PORT=$(free_port)
    RECV_LOG=$TEST_TMP/received-$RECV_PORT.jsonl
    RECV_UP=$TEST_TMP/up
    python3 "$TOP/tests/blackbox/webhook_receiver.py" "$RECV_PORT" "$RECV_LOG" "$RECV_UP" "$@" &
    _pids+=("$!")
    wait_until "the receiver" 200 receiver_up
}

receiver_up() {
    python3 -c "import socket; socket.create_connection(('127.0.0.1', $RECV_PORT), 1)" 2>/dev/null
}
