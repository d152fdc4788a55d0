"""TensorFlow's tutorial "Multi-worker training with Keras" (tutorials/distribute/multi_worker_with_keras):
its main.py as the tutorial writes it, building ``tf.distribute.MultiWorkerMirroredStrategy()`` itself and
calling plain ``fit`` with metrics. Nothing imports tfdevices: ``tfdevices launch`` mends Keras 3's fit in its
workers (keras-team/keras#20585). ``# test size`` marks the steps cut for the tests.
"""

import json
import os

import mnist_setup
import tensorflow as tf

per_worker_batch_size = 64
tf_config = json.loads(os.environ["TF_CONFIG"])
num_workers = len(tf_config["cluster"]["worker"])

strategy = tf.distribute.MultiWorkerMirroredStrategy()

global_batch_size = per_worker_batch_size * num_workers
multi_worker_dataset = mnist_setup.mnist_dataset(global_batch_size)

with strategy.scope():
    # Model building/compiling need to be within `strategy.scope()`.
    multi_worker_model = mnist_setup.build_and_compile_cnn_model()

multi_worker_model.fit(multi_worker_dataset, epochs=3, steps_per_epoch=4)  # test size: was steps_per_epoch=70
