"""dlcp controller: declarative P4Runtime configuration of the DLCP switches (``dlcpctl``)."""
