/* Public access to the strict UTF-8 rules the JSON writer and the stream splitter share. */
#include "harvest/json.h"
#include "utf8.h"

size_t hv_utf8_char_length(const char *bytes, size_t len)
{
	return hv_utf8_sequence_length(bytes, len);
}
