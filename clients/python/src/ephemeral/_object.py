"""EphemeralObject: a JSON object from the API, a dict whose keys are also attributes."""

import json
from typing import Any, Dict


class EphemeralObject(Dict[str, Any]):
    """A dict with attribute access: ``run.cost.charged_micros`` is ``run["cost"]["charged_micros"]``.

    A key that is also the name of a dict method (``items``, ``keys``, ``values``, ``get``...)
    is reached with ``obj["items"]``; a missing key raises AttributeError.
    """

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(
                f"{type(self).__name__} has no field {name!r}"
            ) from None

    def __setattr__(self, name: str, value: Any) -> None:
        self[name] = value

    def __delattr__(self, name: str) -> None:
        try:
            del self[name]
        except KeyError:
            raise AttributeError(name) from None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({dict.__repr__(self)})"

    def to_dict(self) -> Dict[str, Any]:
        """A plain copy, nested objects included."""
        result: Dict[str, Any] = json.loads(json.dumps(self))
        return result


def _hook(pairs: Any) -> EphemeralObject:
    return EphemeralObject(pairs)


def loads(text: str) -> Any:
    """JSON text with every object an EphemeralObject."""
    return json.loads(text, object_pairs_hook=_hook)
