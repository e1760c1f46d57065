-- A job carries its producer's W3C trace context (`traceparent`, checked
-- at enqueue), so its runs are traced as children of the producer's span.
ALTER TABLE boxcar_jobs ADD COLUMN traceparent TEXT;
