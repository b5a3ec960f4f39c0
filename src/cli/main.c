#include "harvest.h"
#include <stdio.h>
int main(void)
{
	printf("harvest %s\n", hv_version());
	return 0;
}
