"""TensorFlow's tutorial "Multi-worker training with Keras" (tutorials/distribute/multi_worker_with_keras):
its main.py, ported to tfdevices. Run it as the tutorial does, one process per worker, here with
``tfdevices launch -n 2 -- python multi_worker_with_keras.py`` (it sets TF_CONFIG).

Unchanged, it fails under Keras 3 (keras-team/keras#20585); ``# tfdevices`` marks the port,
``# test size`` the steps cut for the tests.
"""

import json
import os

import mnist_setup

import tfdevices  # tfdevices

per_worker_batch_size = 64
tf_config = json.loads(os.environ["TF_CONFIG"])
num_workers = len(tf_config["cluster"]["worker"])

strategy = tfdevices.build_strategy()  # tfdevices: was tf.distribute.MultiWorkerMirroredStrategy()

global_batch_size = per_worker_batch_size * num_workers
multi_worker_dataset = mnist_setup.mnist_dataset(global_batch_size)

with strategy.scope():
    # Model building/compiling need to be within `strategy.scope()`.
    multi_worker_model = mnist_setup.build_and_compile_cnn_model()

multi_worker_model.fit(multi_worker_dataset, epochs=3, steps_per_epoch=4)  # test size: was steps_per_epoch=70
