"""What an operator reads: a run's timeline and cost (:mod:`mother.observe.timeline`) and the run
listings over every stored run (:mod:`mother.observe.listing`)."""
