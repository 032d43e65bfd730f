"""The command line's commands, one module each (``grpolab.cli`` assembles them).

Every module has the same three parts, so that a command reads top to bottom:

- ``add(sub)``: its argparse definition (shared flags come from ``commands.shared``, declared once);
- ``parse(args)``: the command-line arguments as a frozen options record, every flag checked and
  every input file read, before anything heavy (torch, TRL, MLflow) is imported;
- ``execute(options)``: the work; it never sees argparse, so the Python API (``grpolab.api``)
  calls it with a record it built itself.

Imports of grpolab's own modules stay inside the functions, as on the rest of the front door:
building the parser (and answering a typo) loads none of the commands' libraries.
"""
