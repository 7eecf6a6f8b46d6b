"""A model's parameters as views of a client's exchange buffers.

:class:`ParameterViews` checks the parameters a program gives the
optimizer (float32, contiguous, on the cpu), copies the chief's values in,
then makes each parameter's ``.data`` and ``.grad`` views of the client's
values and gradients buffers, so a step copies nothing.  Before each step
:meth:`ParameterViews.before_push` puts back a gradient the program
replaced (``model.zero_grad()`` sets them to None) and refuses a parameter
given new storage.  Used by :class:`DistributedOptimizer` from the training
thread only.
"""

from __future__ import annotations

from typing import Iterable, List, Tuple

import torch

import pstrain
from pstrain import Error


def _check_parameter(name: str, p: torch.Tensor) -> None:
    if p.dtype != torch.float32:
        raise Error(f"parameter '{name}' is {p.dtype}: pstrain trains float32 parameters; call model.float() first")
    if not p.is_contiguous():
        raise Error(
            f"parameter '{name}' is not contiguous: make it so (p.data = p.data.contiguous()) before the optimizer, "
            "or pass staged=True"
        )
    if p.device.type != "cpu":
        raise Error(
            f"parameter '{name}' is on {p.device}: with staged=False the parameters are views of pstrain's host "
            "buffers; leave staged unset (a model on a GPU is staged)"
        )


class ParameterViews:
    """The named parameters a program trains, and their places in the buffers."""

    def __init__(self, named_parameters: Iterable[Tuple[str, torch.nn.Parameter]]) -> None:
        self.named = [(n, p) for n, p in named_parameters if isinstance(p, torch.Tensor)]
        if not self.named:
            raise Error("the model has no parameters: pass model.named_parameters()")
        for n, p in self.named:
            _check_parameter(n, p)
        # (parameter, name, address of its values, address of its gradient) in the buffers
        self._places: List[Tuple[torch.Tensor, str, int, int]] = []

    def tensors(self) -> List[Tuple[str, Tuple[int, ...]]]:
        """The (name, shape) pairs the client is made for (a scalar as (1,))."""
        return [(n, tuple(p.shape) or (1,)) for n, p in self.named]

    def copy_in(self, client: pstrain.Client) -> None:
        """The chief: its values into the client's values buffer, for init()."""
        for n, p in self.named:
            client.param(n)[...] = p.detach().numpy().reshape(client.param(n).shape)

    def attach(self, client: pstrain.Client) -> None:
        """Each parameter's .data and .grad become views of the buffers (the
        gradients zeroed)."""
        self._places = []
        for n, p in self.named:
            p.data = torch.from_numpy(client.param(n)).view(p.shape)
            p.grad = torch.from_numpy(client.grad(n)).view(p.shape)
            p.grad.zero_()
            self._places.append((p, n, p.data.data_ptr(), p.grad.data_ptr()))

    def arrived(self, client: pstrain.Client) -> None:
        """After the push's reply: the values are in place already."""

    def zero_grad(self, client: pstrain.Client, set_to_none: bool) -> None:
        """Zeroes every gradient in the exchange buffer, in place."""
        if set_to_none:
            raise Error(
                "zero_grad(set_to_none=True) is refused: the gradients live in pstrain's exchange buffer; "
                "call zero_grad(), or pass staged=True to the DistributedOptimizer"
            )
        client.grads.fill(0.0)

    def release(self) -> None:
        """Nothing to give back."""

    def before_push(self, client: pstrain.Client) -> None:
        """A parameter whose .grad or .data was replaced (model.zero_grad()
        sets grads to None) goes back to its view, with its values copied.
        Each step checks the storage addresses only (no views are made)."""
        for p, n, values_at, grad_at in self._places:
            g = p.grad
            if g is None or g.data_ptr() != grad_at:
                view = client.grad(n)
                if g is None:
                    view.fill(0.0)
                else:
                    view[...] = g.detach().reshape(view.shape).numpy()
                p.grad = torch.from_numpy(view).view(p.shape)
            if p.data_ptr() != values_at:
                raise Error(
                    f"parameter '{n}' was given new storage after the DistributedOptimizer was made: "
                    "change a parameter in place (p.data.copy_(...))"
                )
