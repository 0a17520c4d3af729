"""Plays LMCache prefiller TP ranks for kvbridge's interop test.

Each rank owns a pyzmq PUSH socket connected to the router's PULL endpoint, as
LMCache's PDBackend does, and a notification is one frame holding the msgpack
map {"type": <tag>, "req_id": <id>}, tag first (msgspec's tagged-struct
layout). Commands arrive one per line on stdin; each is answered "ok" (or the
requested hex) on stdout:

  send <req_id> [tag]   every rank sends one notification (default tag ProxyNotif)
  hex <req_id>          print the frame for req_id, hex-encoded
  quit                  close the sockets (delivering what is queued) and exit

Usage: lmcache_push.py <endpoint> <ranks>
"""
import sys

import msgpack
import zmq


def frame(tag, req_id):
    # A dict keeps insertion order, so "type" is written first.
    return msgpack.packb({"type": tag, "req_id": req_id}, use_bin_type=True)


def main():
    endpoint, ranks = sys.argv[1], int(sys.argv[2])
    ctx = zmq.Context()
    socks = []
    for _ in range(ranks):
        s = ctx.socket(zmq.PUSH)
        s.setsockopt(zmq.LINGER, 5000)
        s.connect(endpoint)
        socks.append(s)
    for line in sys.stdin:
        cmd = line.split()
        if not cmd:
            continue
        if cmd[0] == "send":
            tag = cmd[2] if len(cmd) > 2 else "ProxyNotif"
            for s in socks:
                s.send(frame(tag, cmd[1]))
            print("ok", flush=True)
        elif cmd[0] == "hex":
            print(frame("ProxyNotif", cmd[1]).hex(), flush=True)
        elif cmd[0] == "quit":
            break
    for s in socks:
        s.close()
    ctx.term()
    print("ok", flush=True)


if __name__ == "__main__":
    main()
