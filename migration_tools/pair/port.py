"""The Keras port's contract, at the path a port imports it from
(``from migration_tools.pair import port``). Its code lives with its
framework: migration_tools/pair/frameworks/keras_tf/port.py."""
from migration_tools import moved

moved.public(__name__)
