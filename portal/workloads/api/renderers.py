"""The usage report as CSV, for spreadsheets and billing systems (`?format=csv`)."""

import csv
import io

from rest_framework.renderers import BaseRenderer


class UsageCsvRenderer(BaseRenderer):
    """One line per row of the report: its window, its group's keys, GPUs in use, GPU-hours
    and cost; an error answer as its fields and reasons, anything else as names and values."""

    media_type = "text/csv"
    format = "csv"
    charset = "utf-8"

    def render(self, data, accepted_media_type=None, renderer_context=None):
        out = io.StringIO()
        writer = csv.writer(out)
        if "errors" in data:
            writer.writerow(["field", "reason"])
            writer.writerows([e["field"], e["reason"]] for e in data["errors"])
            return out.getvalue()
        if "rows" not in data:  # not a report: what OPTIONS says of the endpoint
            writer.writerow(["name", "value"])
            writer.writerows([key, value] for key, value in data.items())
            return out.getvalue()
        keys = data["group_by"]
        writer.writerow(["since", "until", *keys, "in_use", "gpu_hours", "cost", "currency"])
        for row in data["rows"]:
            writer.writerow(
                [
                    data["since"],
                    data["until"],
                    *(row.get(key, "") for key in keys),
                    row["in_use"],
                    f"{row['gpu_hours']:.4f}",
                    f"{row['cost']:.2f}",
                    data["currency"],
                ]
            )
        return out.getvalue()
