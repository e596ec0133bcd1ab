# -*- coding: latin-1 -*-
"""A TF 1 file saved in Latin-1, as some older repositories were; written
for the scanner tests. `# expect:` lists the rule ids of its line."""
import tensorflow as tf

AUTHOR = "José Muñoz"  # Not valid UTF-8 as bytes.


def count_records(path):
  """Zählt die Datensätze."""
  return sum(1 for _ in tf.python_io.tf_record_iterator(path))  # expect: python-io


def session():
  return tf.InteractiveSession()  # expect: interactive-session
