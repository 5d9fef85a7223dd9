"""GridStat: QoS-managed status dissemination for the electric power grid.

The package is split by role (see DESIGN.md): ``core`` holds the model, the wire
format and the pure forwarding algorithms; ``router`` the status router process;
``client`` the publisher and subscriber SDK; ``cli`` the ``gridstat`` command.
"""

__version__ = "0.1.0"
