"""The result lines both halves print, in one format (tools and tests read them)."""


def print_eval(accuracy: float, images: int, loss: float, step: int) -> None:
  print(f'Eval accuracy: {accuracy:.4f} on {images} test images '
        f'(loss {loss:.4f}, step {step})')


def print_prediction(class_id: int, probability: float, label: int) -> dict:
  """Prints one prediction; returns it as a dict."""
  print(f'Prediction is "{class_id}" ({100 * probability:.1f}%), label {label}')
  return {'class_id': class_id, 'probability': probability, 'label': label}
