"""A parameter server on torch.distributed.rpc, written the usual way:
rank 0 ("ps") holds the CNN's parameters and a torch Adam optimizer;
workers (ranks 1..W, "worker0"...) compute gradients on their shard and
send them with rpc_sync, which returns the new parameters.  Sync: the PS
averages one gradient of every worker and steps once (the reply waits, an
async_execution future, until every worker's gradient arrived).  Async:
each gradient is applied on arrival.  Training ends at --steps updates.
Worker 0 prints one JSON line: samples_per_sec after its warm-up steps
(updates applied x batch, x W in sync), steady_samples_per_sec over the
last half (from the first reply at or after update N/2 to the end: the
figure bench/torch-ps/run compares), the test accuracy and the ms per step
of the rpc (gradients out, parameters back).  --flush-denormal:
torch.set_flush_denormal(True) in every rank's main thread before rpc
starts (its threads inherit it) and, on the PS, again in the rpc thread
that runs each push (where Adam steps), should that thread predate it.

  rpc_ps.py --rank R --world 3 --port P [--sync] [--steps N] [--warmup W] [--flush-denormal]
"""

import argparse
import threading
import time

import torch
import torch.distributed.rpc as rpc

import common

SERVER = None
FLUSH = False


class Server:
    def __init__(self, workers, sync, steps):
        self.model = common.make_cnn()
        self.params = list(self.model.parameters())
        self.opt = torch.optim.Adam(self.params, lr=common.LR)
        self.workers, self.sync, self.steps = workers, sync, steps
        self.lock = threading.Lock()
        self.step, self.arrived = 0, 0
        self.future = torch.futures.Future()

    def values(self):
        return [p.detach().clone() for p in self.params], self.step

    @staticmethod
    def get():
        with SERVER.lock:
            return SERVER.values()

    @staticmethod
    @rpc.functions.async_execution
    def push(grads):
        s = SERVER
        if FLUSH:  # this rpc thread's own MXCSR, should the thread predate the main thread's flag
            torch.set_flush_denormal(True)
        with s.lock:
            if s.step >= s.steps:  # training is over: the values, nothing applied
                done = torch.futures.Future()
                done.set_result(s.values())
                return done
            if not s.sync:
                for p, g in zip(s.params, grads):
                    p.grad = g
                s.opt.step()
                s.step += 1
                done = torch.futures.Future()
                done.set_result(s.values())
                return done
            for p, g in zip(s.params, grads):
                p.grad = g.clone() if s.arrived == 0 else p.grad.add_(g)
            s.arrived += 1
            fut = s.future
            if s.arrived == s.workers:
                for p in s.params:
                    p.grad.div_(s.workers)
                s.opt.step()
                s.step += 1
                s.arrived = 0
                s.future = torch.futures.Future()
                fut.set_result(s.values())
            return fut


def main():
    global SERVER, FLUSH
    p = argparse.ArgumentParser()
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, default=3)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--sync", action="store_true")
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--flush-denormal", action="store_true")
    a = p.parse_args()
    common.one_thread()
    FLUSH = common.flush_denormal(a.flush_denormal)
    workers = a.world - 1
    opts = rpc.TensorPipeRpcBackendOptions(init_method="tcp://127.0.0.1:%d" % a.port)
    if a.rank == 0:
        SERVER = Server(workers, a.sync, a.steps)
        rpc.init_rpc("ps", rank=0, world_size=a.world, rpc_backend_options=opts)
        rpc.shutdown()  # waits for every worker to finish
        return
    index = a.rank - 1
    rpc.init_rpc("worker%d" % index, rank=a.rank, world_size=a.world, rpc_backend_options=opts)
    x, y, tx, ty, source = common.load_images()
    model = common.make_cnn()
    params = list(model.parameters())
    loss_fn = torch.nn.CrossEntropyLoss()
    batches = common.Batches(x, y, index, workers)
    exchange = common.Exchange(a.warmup)

    def set_values(reply):
        values, step = reply
        with torch.no_grad():
            for q, v in zip(params, values):
                q.copy_(v)
        return step

    step, local, t0, g0 = set_values(rpc.rpc_sync("ps", Server.get)), 0, None, 0
    steady = common.Steady(a.steps)
    while step < a.steps:
        steady.mark(step)
        if local == a.warmup:
            t0, g0 = time.perf_counter(), step
        bx, by = batches.next()
        model.zero_grad()
        loss_fn(model(bx), by).backward()
        step = set_values(exchange.time(rpc.rpc_sync, "ps", Server.push, ([q.grad for q in params],)))
        local += 1
    seconds = time.perf_counter() - t0
    per_update = common.BATCH * (workers if a.sync else 1)
    last_half = steady.fields(step, per_update)
    if index == 0:
        samples = (step - g0) * per_update
        common.report(
            framework="torch-rpc-ps",
            mode="sync" if a.sync else "async",
            workers=workers,
            steps=a.steps,
            warmup=a.warmup,
            samples_per_sec=samples / seconds,
            **last_half,
            flush_denormal=FLUSH,
            test_accuracy=common.accuracy(model, tx, ty),
            exchange_ms=exchange.ms(),
            data=source,
            torch=torch.__version__,
        )
    rpc.shutdown()


if __name__ == "__main__":
    main()
