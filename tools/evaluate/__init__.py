"""`sdk evaluate`: the model's accuracy against labelled images (labels, class map, detections, COCO's metrics, budgets)."""
