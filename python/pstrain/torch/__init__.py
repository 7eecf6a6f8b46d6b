"""PyTorch models on pstrain's parameter servers.

:class:`DistributedOptimizer` is used as a torch optimizer is
(``zero_grad()``, ``loss.backward()``, ``step()``), but the optimizer runs
on the PS tasks: ``step()`` sends the gradients and brings the new values
back.  Parameters and gradients live in the client's exchange buffers
(each parameter's ``.data`` and ``.grad`` are views of them), so a step
copies nothing.

:class:`EmbeddingBag` and :class:`Embedding` are embedding tables whose
rows live on the PS tasks: each forward pulls the batch's unique ids once,
autograd runs through the pulled rows, and ``step()`` pushes the rows'
summed gradients once per table.  A program passes the tables it trains to
the optimizer (``embeddings=[...]``).

:class:`ElasticSampler` gives a worker its shard of a dataset and re-splits
it when the workers alive change (``elastic=True``).

:class:`Preempted` is the ``SystemExit`` (status 143) that ``step()``
raises when the job stopped for preemption.

The modules: :mod:`.optimizer` (the optimizer), :mod:`.views` (the
parameters as views of the exchange buffers), :mod:`.embedding` (the
tables), :mod:`.sampler` (the elastic sampler), :mod:`.preemption`
(checkpoints, SIGTERM and the finish at exit).
"""

from .embedding import Embedding, EmbeddingBag
from .optimizer import DistributedOptimizer
from .preemption import Preempted
from .sampler import ElasticSampler

__all__ = ["DistributedOptimizer", "ElasticSampler", "Embedding", "EmbeddingBag", "Preempted"]
