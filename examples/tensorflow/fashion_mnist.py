"""Fashion-MNIST from the IDX files of Debian's dataset-fashion-mnist
package (or any directory of the four standard files, gzipped or not), as
TensorFlow ops: a ParameterServerStrategy dataset_fn runs on the workers,
which read the files themselves (every node has the package)."""

import os

import tensorflow as tf

DEFAULT_DIR = os.environ.get("PSTRAIN_DATA_DIR", "/usr/share/datasets/fashion-mnist")


def _read(path):
    data = tf.io.read_file(path)
    if path.endswith(".gz"):
        data = tf.io.decode_compressed(data, compression_type="GZIP")
    return tf.io.decode_raw(data, tf.uint8)


def _file(data_dir, stem):
    for name in (stem + ".gz", stem):
        path = os.path.join(data_dir, name)
        if os.path.exists(path):
            return path
    raise SystemExit("fashion_mnist: no %s(.gz) in %s: give --data-dir DIR with the IDX files" % (stem, data_dir))


def arrays(data_dir=DEFAULT_DIR, split="train"):
    """(images float32 [N, 784] in [0, 1], labels int32 [N]) as tensors."""
    prefix = "train" if split == "train" else "t10k"
    images = _read(_file(data_dir, prefix + "-images-idx3-ubyte"))[16:]
    labels = _read(_file(data_dir, prefix + "-labels-idx1-ubyte"))[8:]
    images = tf.cast(tf.reshape(images, [-1, 784]), tf.float32) / 255.0
    return images, tf.cast(labels, tf.int32)


def check(data_dir=DEFAULT_DIR):
    """Fails early, on the coordinator, when the files are missing."""
    for stem in (
        "train-images-idx3-ubyte",
        "train-labels-idx1-ubyte",
        "t10k-images-idx3-ubyte",
        "t10k-labels-idx1-ubyte",
    ):
        _file(data_dir, stem)
