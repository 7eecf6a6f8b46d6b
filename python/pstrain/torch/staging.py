"""A model's parameters kept where they are, staged through the client's
host buffers: a CUDA model's, or any model given ``staged=True``.

:class:`StagedParameters` leaves each parameter's storage alone. Its
gradients go to the client's gradients buffer bucket by bucket as backward
produces them (a post-accumulate-grad hook per parameter; buckets of the
parameters in reverse order, the last layer's first, as DDP's reducer
makes them: the first up to 1 MB, the others up to 25 MB), each bucket's
copies on a copy stream of their own once its last gradient is ready; the
new values come back from the values buffer after the push's reply, on
another stream, which the next forward waits for on the GPU (the host
does not). On a CUDA device the client's buffers are pinned
(``cudaHostRegister``) for the time of the optimizer, so the copies are
DMA and overlap backward. On the CPU (``staged=True``) the same schedule
runs with plain copies: what the tests check without a GPU.

A gradient changed after its bucket was copied (gradient clipping between
backward and ``step()``: every in-place change bumps the tensor's version)
is copied again before the push; a parameter without a gradient (not used
this step) pushes zeros. Used by :class:`DistributedOptimizer` from the
training thread only (the hooks run on autograd's threads).
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

import torch

import pstrain
from pstrain import Error

FIRST_BUCKET_BYTES = 1 << 20
BUCKET_BYTES = 25 << 20


def bucket_plan(sizes: Sequence[int], first_cap: int = FIRST_BUCKET_BYTES, cap: int = BUCKET_BYTES) -> List[List[int]]:
    """The buckets of tensors of ``sizes`` bytes (in the model's order):
    lists of their indices, the last tensor first, each bucket filled up to
    its cap (``first_cap`` for the first, then ``cap``); a tensor larger
    than a cap has a bucket of its own."""
    buckets: List[List[int]] = []
    current: List[int] = []
    filled = 0
    for i in reversed(range(len(sizes))):
        limit = first_cap if not buckets else cap
        if current and filled + sizes[i] > limit:
            buckets.append(current)
            current, filled = [], 0
        current.append(i)
        filled += sizes[i]
    if current:
        buckets.append(current)
    return buckets


def _check_parameter(name: str, p: torch.Tensor) -> None:
    if p.dtype != torch.float32:
        raise Error(f"parameter '{name}' is {p.dtype}: pstrain trains float32 parameters; call model.float() first")
    if p.device.type not in ("cpu", "cuda"):
        raise Error(f"parameter '{name}' is on {p.device}: pstrain stages cpu and cuda parameters; move the model")


def _state(grad: Optional[torch.Tensor]) -> Tuple[int, int]:
    """A gradient's storage and version: either changes when the program
    replaces or changes it in place (clipping, another backward)."""
    return (0, -1) if grad is None else (grad.data_ptr(), grad._version)


class _Copies:
    """Where a bucket's copies run: a CUDA device's two copy streams and
    events, or plain copies on the CPU."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.device = device
        if self.cuda:
            self.out_stream = torch.cuda.Stream(device)  # gradients to the host
            self.in_stream = torch.cuda.Stream(device)  # values to the device
        self.values_in: Optional[Any] = None  # the event of the last values' copies

    def to_host(self, pairs: List[Tuple[torch.Tensor, torch.Tensor]]) -> Optional[Any]:
        """Copies each (device gradient, host view) once the compute stream
        has produced it; returns the event that says they are done."""
        if not self.cuda:
            for grad, host in pairs:
                host.copy_(grad.reshape(host.shape))
            return None
        self.out_stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(self.out_stream):
            for grad, host in pairs:
                host.copy_(grad.reshape(host.shape), non_blocking=True)
                grad.record_stream(self.out_stream)  # not reused before the copy, even if set to None
            done = torch.cuda.Event()
            done.record(self.out_stream)
        return done

    def to_device(self, pairs: List[Tuple[torch.Tensor, torch.Tensor]]) -> None:
        """Copies each (host values, parameter) in; the compute stream's
        next work (the next forward) waits for them, the host does not."""
        if not self.cuda:
            with torch.no_grad():
                for host, p in pairs:
                    p.copy_(host.reshape(p.shape))
            return
        compute = torch.cuda.current_stream(self.device)
        self.in_stream.wait_stream(compute)  # what still reads the old values runs first
        with torch.no_grad(), torch.cuda.stream(self.in_stream):
            for host, p in pairs:
                p.copy_(host.reshape(p.shape), non_blocking=True)
            self.values_in = torch.cuda.Event()
            self.values_in.record(self.in_stream)
        compute.wait_stream(self.in_stream)

    def values_read(self) -> None:
        """Before the values buffer is written again (the next push's
        reply): the copies out of it are done."""
        if self.values_in is not None:
            self.values_in.synchronize()
            self.values_in = None


class StagedParameters:
    """The named parameters a program trains, left in their own storage;
    the same methods as :class:`.views.ParameterViews`."""

    def __init__(
        self,
        named_parameters: Iterable[Tuple[str, torch.nn.Parameter]],
        first_bucket_bytes: int = FIRST_BUCKET_BYTES,
        bucket_bytes: int = BUCKET_BYTES,
    ) -> None:
        self.named = [(n, p) for n, p in named_parameters if isinstance(p, torch.Tensor)]
        if not self.named:
            raise Error("the model has no parameters: pass model.named_parameters()")
        for n, p in self.named:
            _check_parameter(n, p)
        devices = sorted({str(p.device) for _, p in self.named})
        if len(devices) > 1:
            raise Error(
                f"the parameters are on {' and '.join(devices)}: one worker trains on one device; "
                "move the whole model there (one worker per GPU: torch-train.sh gives each its own)"
            )
        self.device = self.named[0][1].device
        self.buckets = bucket_plan(
            [p.numel() * p.element_size() for _, p in self.named], first_bucket_bytes, bucket_bytes
        )
        self._bucket_of = {i: b for b, members in enumerate(self.buckets) for i in members}
        self._copies = _Copies(self.device)
        self._client: Optional[pstrain.Client] = None
        self._grads: List[torch.Tensor] = []  # host views of the gradients buffer, by parameter
        self._values: List[torch.Tensor] = []  # ... of the values buffer
        self._hooks: List[Any] = []
        self._pinned: List[int] = []  # host addresses registered with CUDA
        self._begin_step()
        # What the tests read: the buckets in the order their copies started.
        self.copied_order: List[int] = []

    def _begin_step(self) -> None:
        self._ready = [0] * len(self.buckets)  # gradients accumulated this step, by bucket
        # bucket: (the event of its copies, its gradients' states then)
        self._copied: Dict[int, Tuple[Optional[Any], List[Tuple[int, int]]]] = {}

    def tensors(self) -> List[Tuple[str, Tuple[int, ...]]]:
        """The (name, shape) pairs the client is made for (a scalar as (1,))."""
        return [(n, tuple(p.shape) or (1,)) for n, p in self.named]

    def copy_in(self, client: pstrain.Client) -> None:
        """The chief: its values into the client's values buffer, for init()."""
        for n, p in self.named:
            client.param(n)[...] = p.detach().cpu().numpy().reshape(client.param(n).shape)

    def attach(self, client: pstrain.Client) -> None:
        """The values the client holds into the parameters, and the hooks
        that copy each bucket's gradients as backward completes it."""
        self._client = client
        if self._copies.cuda and not self._pinned:
            self._pin(client)
        self._grads = [torch.from_numpy(client.grad(n)) for n, _ in self.named]
        self._values = [torch.from_numpy(client.param(n)) for n, _ in self.named]
        self._copies.to_device([(v, p) for v, (_, p) in zip(self._values, self.named)])
        for h in self._hooks:
            h.remove()
        self._hooks = [p.register_post_accumulate_grad_hook(self._hook(i)) for i, (_, p) in enumerate(self.named)]
        self._begin_step()

    def _pin(self, client: pstrain.Client) -> None:
        cudart = torch.cuda.cudart()
        for buffer in (client.params, client.grads):
            address, nbytes = buffer.ctypes.data, buffer.nbytes
            status = cudart.cudaHostRegister(address, nbytes, 0)
            if int(status) != 0:
                raise Error(
                    f"cudaHostRegister of pstrain's {nbytes}-byte exchange buffer failed ({status}): "
                    "raise the locked-memory limit (ulimit -l, Slurm's PropagateResourceLimits)"
                )
            self._pinned.append(address)

    def release(self) -> None:
        """The hooks removed and the buffers unpinned (finish)."""
        for h in self._hooks:
            h.remove()
        self._hooks = []
        if self._pinned:
            torch.cuda.synchronize(self.device)
            cudart = torch.cuda.cudart()
            for address in self._pinned:
                cudart.cudaHostUnregister(address)
            self._pinned = []

    def _hook(self, i: int) -> Any:
        def accumulated(p: torch.Tensor) -> None:
            b = self._bucket_of[i]
            self._ready[b] += 1
            if self._ready[b] == len(self.buckets[b]) and b not in self._copied:
                self._copy_bucket(b)

        return accumulated

    def _copy_bucket(self, b: int) -> None:
        pairs, versions = [], []
        for i in self.buckets[b]:
            grad = self.named[i][1].grad
            if grad is None:
                self._grads[i].zero_()
            else:
                pairs.append((grad, self._grads[i]))
            versions.append(_state(grad))
        self._copied[b] = (self._copies.to_host(pairs), versions)
        self.copied_order.append(b)

    def _changed_since_copied(self, b: int) -> bool:
        _, versions = self._copied[b]
        return any(_state(self.named[i][1].grad) != seen for i, seen in zip(self.buckets[b], versions))

    def before_push(self, client: pstrain.Client) -> None:
        """Before the push: every bucket's gradients in the buffer (those
        whose hooks did not all fire, and those changed since their copy,
        copied now) and their copies done; the values buffer free again."""
        self._copies.values_read()
        for b in range(len(self.buckets)):
            if b not in self._copied or self._changed_since_copied(b):
                self._copy_bucket(b)
        for event, _ in self._copied.values():
            if event is not None:
                event.synchronize()

    def push_buckets(self, client: pstrain.Client, position: int, skip: bool = False) -> List[Tuple[int, Any]]:
        """The overlapped step: each bucket pushed as soon as its
        copies are done, the last layer's first (a gradient changed since
        its copy copied again first), so that each PS applies and answers
        one bucket while the next ones come; (bucket, ticket) pairs, for
        :meth:`bucket_arrived`.  ``skip``: every bucket says so, and no PS
        applies any bucket of the step (the other workers' neither)."""
        self._copies.values_read()
        tickets = []
        for b in range(len(self.buckets)):
            if b not in self._copied or self._changed_since_copied(b):
                self._copy_bucket(b)
            event, _ = self._copied[b]
            if event is not None:
                event.synchronize()
            names = [self.named[i][0] for i in self.buckets[b]]
            tickets.append((b, client.push(names, position=position, skip=skip, bucket=True)))
        return tickets

    def bucket_arrived(self, b: int) -> None:
        """After bucket b's reply: its new values into its parameters (the
        next forward waits for them on the device)."""
        self._copies.to_device([(self._values[i], self.named[i][1]) for i in self.buckets[b]])

    def end_step(self) -> None:
        """Every bucket's values are in: a new step begins."""
        self._begin_step()

    def arrived(self, client: pstrain.Client) -> None:
        """After the push's reply: the new values into the parameters (the
        next forward waits for them on the device); a new step begins."""
        self._copies.to_device([(v, p) for v, (_, p) in zip(self._values, self.named)])
        self._begin_step()

    def zero_grad(self, client: pstrain.Client, set_to_none: bool) -> None:
        """As torch's optimizers do, on the parameters' own gradients."""
        for _, p in self.named:
            if p.grad is None:
                continue
            if set_to_none:
                p.grad = None
            else:
                p.grad.detach_()
                p.grad.zero_()
