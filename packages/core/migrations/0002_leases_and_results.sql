-- inboxed migration 0002_leases_and_results
ALTER TABLE "inbox" ADD COLUMN IF NOT EXISTS "lease_expires_at" timestamp with time zone;
--> statement-breakpoint
ALTER TABLE "inbox" ADD COLUMN IF NOT EXISTS "fencing_token" integer DEFAULT 1 NOT NULL;
--> statement-breakpoint
ALTER TABLE "inbox" ADD COLUMN IF NOT EXISTS "result" text;
--> statement-breakpoint
CREATE INDEX IF NOT EXISTS "inbox_processing_idx" ON "inbox" USING btree ("completed_at") WHERE status = 'processing';
