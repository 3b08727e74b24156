"""How the key components compute the answer's number (issue 32): the Fourier view of their direct effect on the
number tokens, and which neurons of the key MLPs move the units and which the tens digit of a two-digit sum
(``circuits numbers``).

The job: ``config`` (torch-free), ``job`` (``run(config, out)``, its one entry point), ``result``."""
