"""TensorFlow's tutorial "Distributed training with Keras" (tutorials/distribute/keras), ported to tfdevices.

The tutorial's code as published for TensorFlow 2.16+ (Keras 3), with its prose left out.
Lines marked ``# tfdevices`` are the port; lines marked ``# test size`` only make it run in
seconds without a download (data of MNIST's shape from tests/tutorials/data.py, fewer epochs);
``# keras 3`` marks the checkpoint file names Keras 3 requires (``.weights.h5``), whatever the strategy.
"""

import os

import data as tfds  # test size: tests/tutorials/data.py, beside this script; was `import tensorflow_datasets as tfds`
import tensorflow as tf

import tfdevices  # tfdevices

tfdevices.configure(virtual_devices=2)  # tfdevices: two logical CPUs here; on GPUs: configure("auto:2")
print(tf.__version__)

datasets, info = tfds.tfds_load()  # test size: was tfds.load(name='mnist', with_info=True, as_supervised=True)

mnist_train, mnist_test = datasets["train"], datasets["test"]

strategy = tfdevices.build_strategy("mirrored")  # tfdevices: was tf.distribute.MirroredStrategy()

print(f"Number of devices: {strategy.num_replicas_in_sync}")

# You can also do info.splits.total_num_examples to get the total
# number of examples in the dataset.

num_train_examples = info.splits["train"].num_examples
num_test_examples = info.splits["test"].num_examples

BUFFER_SIZE = 10000

BATCH_SIZE_PER_REPLICA = 64
BATCH_SIZE = BATCH_SIZE_PER_REPLICA * strategy.num_replicas_in_sync


def scale(image, label):
    image = tf.cast(image, tf.float32)
    image /= 255

    return image, label


train_dataset = mnist_train.map(scale).cache().shuffle(BUFFER_SIZE).batch(BATCH_SIZE)
eval_dataset = mnist_test.map(scale).batch(BATCH_SIZE)

with strategy.scope():
    model = tf.keras.Sequential(
        [
            tf.keras.layers.Conv2D(32, 3, activation="relu", input_shape=(28, 28, 1)),
            tf.keras.layers.MaxPooling2D(),
            tf.keras.layers.Flatten(),
            tf.keras.layers.Dense(64, activation="relu"),
            tf.keras.layers.Dense(10),
        ]
    )

    model.compile(
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        optimizer=tf.keras.optimizers.Adam(),
        metrics=["accuracy"],
    )

# Define the checkpoint directory to store the checkpoints.
checkpoint_dir = "./training_checkpoints"
# Define the name of the checkpoint files.
checkpoint_prefix = os.path.join(checkpoint_dir, "ckpt_{epoch}.weights.h5")  # keras 3: was "ckpt_{epoch}"


# Define a function for decaying the learning rate.
# You can define any decay function you need.
def decay(epoch):
    if epoch < 3:
        return 1e-3
    elif epoch >= 3 and epoch < 7:
        return 1e-4
    else:
        return 1e-5


# Define a callback for printing the learning rate at the end of each epoch.
class PrintLR(tf.keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        print(f"\nLearning rate for epoch {epoch + 1} is {model.optimizer.learning_rate.numpy()}")


# Put all the callbacks together.
callbacks = [
    tf.keras.callbacks.TensorBoard(log_dir="./logs"),
    tf.keras.callbacks.ModelCheckpoint(filepath=checkpoint_prefix, save_weights_only=True),
    tf.keras.callbacks.LearningRateScheduler(decay),
    PrintLR(),
]

EPOCHS = 2  # test size: was 12

model.fit(train_dataset, epochs=EPOCHS, callbacks=callbacks)

model.load_weights(
    os.path.join(checkpoint_dir, f"ckpt_{EPOCHS}.weights.h5")
)  # keras 3: was tf.train.latest_checkpoint(checkpoint_dir)

eval_loss, eval_acc = model.evaluate(eval_dataset)

print(f"Eval loss: {eval_loss}, Eval accuracy: {eval_acc}")
