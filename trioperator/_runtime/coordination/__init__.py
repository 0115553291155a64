"""Working with other operators: peering (pausing for a peer of higher priority) and sharding.

``peering.py`` writes this operator's keep-alives and turns the operator's pause on and off as
peers come and go; ``sharding.py`` keeps this replica's Lease, the ring of replicas and the
hand-over of objects between them. The pipeline asks them (the pause, the share) and does not
know how they decide.
"""
