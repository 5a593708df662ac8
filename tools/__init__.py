"""Host tools: prepare, deploy, release staging and targets. Uses `sdk`; never shipped to a vehicle."""
