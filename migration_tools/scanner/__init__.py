"""The scanner: rules (rules.py, tf_api.py), the AST engine, the reports."""
