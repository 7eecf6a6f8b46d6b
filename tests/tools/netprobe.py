#!/usr/bin/env python3
"""netprobe: what a link between two nodes of the --netns test cluster does.

    netprobe.py serve PORT                 # in the far node: TCP echo + UDP counter
    netprobe.py rtt HOST PORT [--count N]  # TCP round trips of one byte: JSON with the median, in us
    netprobe.py loss HOST PORT [--count N] # N UDP datagrams one way: JSON with how many arrived

`serve` answers each TCP byte with one byte and, for `loss`, counts the UDP
datagrams of a numbered run and says how many came, over TCP once the
sender asks.  stdlib only.
"""
import argparse
import json
import socket
import statistics
import sys
import threading
import time


def serve(port):
    tcp = socket.socket()
    tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    tcp.bind(("0.0.0.0", port))
    tcp.listen(8)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    udp.bind(("0.0.0.0", port))
    seen = {}  # run id -> set of sequence numbers
    lock = threading.Lock()

    def count_udp():
        while True:
            data, _ = udp.recvfrom(64)
            run, seq = data.decode().split()
            with lock:
                seen.setdefault(run, set()).add(int(seq))

    threading.Thread(target=count_udp, daemon=True).start()
    print("netprobe: serving on port %d" % port, flush=True)
    while True:
        conn, _ = tcp.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        first = conn.recv(64)
        if first.startswith(b"count "):  # "count RUN": how many of that run came
            time.sleep(0.5)  # the last datagrams' delay
            with lock:
                n = len(seen.pop(first.split()[1].decode(), ()))
            conn.sendall(b"%d\n" % n)
            conn.close()
            continue
        conn.sendall(first)
        while True:
            b = conn.recv(64)
            if not b:
                break
            conn.sendall(b)
        conn.close()


def rtt(host, port, count):
    s = socket.create_connection((host, port), timeout=10)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    times = []
    for i in range(count + 10):
        t0 = time.perf_counter()
        s.sendall(b"x")
        if s.recv(1) != b"x":
            sys.exit("netprobe: the echo broke off")
        if i >= 10:  # the first ones warm the path
            times.append((time.perf_counter() - t0) * 1e6)
        time.sleep(0.002)
    s.close()
    print(json.dumps({"rtt_median_us": statistics.median(times), "rtt_min_us": min(times), "count": len(times),
                      "rtt_p90_us": sorted(times)[int(0.9 * len(times))]}))


def loss(host, port, count):
    run = "%x" % int(time.time() * 1e6)
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for i in range(count):
        u.sendto(("%s %d" % (run, i)).encode(), (host, port))
        if i % 50 == 49:
            time.sleep(0.001)  # stay under the queues' limits: loss is the link's, not an overflow's
    # The answer over TCP: it may be lost and resent, never miscounted.
    s = socket.create_connection((host, port), timeout=30)
    s.sendall(("count " + run).encode())
    got = int(s.makefile().readline())
    print(json.dumps({"sent": count, "arrived": got, "lost": count - got, "loss": (count - got) / count}))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=["serve", "rtt", "loss"])
    p.add_argument("args", nargs="+")
    p.add_argument("--count", type=int, default=200)
    a = p.parse_args()
    if a.what == "serve":
        serve(int(a.args[0]))
    elif a.what == "rtt":
        rtt(a.args[0], int(a.args[1]), a.count)
    else:
        loss(a.args[0], int(a.args[1]), a.count)


if __name__ == "__main__":
    main()
