"""The core: every decision the library makes, in plain Python over ``attrs`` values.

Nothing here touches a tensor or imports anything but ``attrs`` and the
exception family: the ring and its rules (``ring``), the effect values
(``effects``, ``save_batch``, ``effect_dict``), the one column coercion
(``columns``), the batched boundary step (``boundaries``), rollback plans
(``rollback``) and verify steps (``verify``). The public modules re-export
from here; nothing here imports them.
"""
