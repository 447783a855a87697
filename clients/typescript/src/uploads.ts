// Uploads: archives uploaded once, for runs to seed their workspaces with.

/** An archive kept for runs to seed their workspaces with (`workspace.archive`). */
export interface Upload {
  /** What a run names as its `workspace.archive`. */
  id: string;
  /** Bytes of the archive, as uploaded. */
  size: number;
  /** The regular files it holds. */
  files: number;
  created_at: string;
  /** When retention removes it; `null` when it is kept until removed. */
  expires_at: string | null;
}

/** The kinds of archive `POST /v1/uploads` takes, by `Content-Type`. */
export type UploadContentType =
  | "application/gzip"
  | "application/x-gzip"
  | "application/zip"
  | "application/x-zip-compressed";
