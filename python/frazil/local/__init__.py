"""What frazil starts on this machine by itself: a single-node Kafka broker for ``frazil demo``
(and the test and bench harnesses), and the Maven Central jar bundles it and Spark need."""
